//! `kfaws image push` end to end: the image `kfaws image build` writes is
//! pushed through the emulated ECR to the real registry behind it
//! (Debian's `docker-registry` on loopback, started by the emulator), then
//! read back over the registry API with the ECR token; a second push
//! uploads nothing (seen in the registry's own request counters) and the
//! repository is created once (seen in the emulator's call log); bad input
//! is refused before any AWS call; a refused GetAuthorizationToken is
//! reported by name and pushes nothing; an interrupt stops the push before
//! its next step.
//!
//! Run under `tests/emulator/with_emulator.sh` (`make test` does); needs the
//! Debian packages docker-registry and apache2-utils (`make deps`).

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};

use assert_cmd::Command;
use base64::Engine as _;
use common::aws::{control, fresh_account, Account};
use serde_json::Value;
use sha2::{Digest, Sha256};

const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

fn trainer() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("kfaws").with_file_name("kfaws-trainer");
    assert!(
        bin.is_file(),
        "{} is built with the workspace (cargo test --workspace)",
        bin.display()
    );
    bin
}

fn build(dir: &Path, tag: &str) {
    Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir)
        .args(["image", "build", "--tag", tag, "--trainer"])
        .arg(trainer())
        .assert()
        .success();
}

/// `kfaws image push ARGS` in `dir` as account `account`: (success, stdout, stderr).
fn push(dir: &Path, account: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir)
        .env("AWS_ACCESS_KEY_ID", account)
        .args(["image", "push"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The emulator's registry (`GET /_kfaws/ecr/registry`).
fn registry() -> Value {
    let url = format!(
        "{}/ecr/registry",
        std::env::var("KFAWS_EMULATOR_CONTROL").expect("run under with_emulator.sh")
    );
    let out = StdCommand::new("curl")
        .args(["-sS", &url])
        .output()
        .unwrap();
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        body.get("url").is_some(),
        "the emulator has no registry (install the Debian packages docker-registry \
         apache2-utils: make deps): {body}"
    );
    body
}

/// `registry_http_requests_total` of the registry's Prometheus metrics for
/// `handler`, `method`, `code`.
fn requests(metrics_url: &str, handler: &str, method: &str, code: &str) -> u64 {
    let out = StdCommand::new("curl")
        .args(["-fsS", metrics_url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let labels = format!("{{code=\"{code}\",handler=\"{handler}\",method=\"{method}\"}}");
    text.lines()
        .filter_map(|l| l.strip_prefix("registry_http_requests_total"))
        .filter_map(|l| l.strip_prefix(labels.as_str()))
        .map(|n| n.trim().parse::<f64>().unwrap() as u64)
        .sum()
}

/// GET `url` with `Authorization: Basic <token>` (given to curl on stdin,
/// not on its command line): (content type, body).
fn get(url: &str, token: &str, accept: &str) -> (String, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    let mut child = StdCommand::new("curl")
        .args(["-fsS", "-K", "-", "-D"])
        .arg(&headers)
        .arg(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    write!(
        child.stdin.take().unwrap(),
        "header = \"Authorization: Basic {token}\"\nheader = \"Accept: {accept}\"\n"
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "GET {url}: {out:?}");
    let content_type = std::fs::read_to_string(&headers)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    (content_type, out.stdout)
}

fn local_digest(image: &Path) -> String {
    let index: Value =
        serde_json::from_slice(&std::fs::read(image.join("oci/index.json")).unwrap()).unwrap();
    index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

fn count(account: &Account, operation: &str) -> u64 {
    account
        .calls()
        .into_iter()
        .filter(|(service, op, _)| service == "ecr" && op == operation)
        .map(|(_, _, n)| n)
        .sum()
}

/// Held by the tests that upload blobs: the registry's request counters, which
/// `push_creates_the_repository_and_the_registry_serves_the_same_image` reads
/// to prove that a second push uploads nothing, count every repository's.
static UPLOADS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn push_creates_the_repository_and_the_registry_serves_the_same_image() {
    let _uploads = UPLOADS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), "kfaws-trainer:push-e2e");
    let image = dir.path().join("kfaws-trainer-image");
    let digest = local_digest(&image);
    let reg = registry();
    let metrics = reg["metrics_url"].as_str().unwrap();
    let id = fresh_account();
    let account = Account::new(&id).await;
    // The registry is one for all accounts: a repository of this test's own.
    let repository = format!("e2e-{id}/trainer");
    let uploads_before = requests(metrics, "blob_upload", "post", "202");

    let (ok, stdout, stderr) = push(dir.path(), &id, &["--repository", &repository]);
    assert!(ok, "{stderr}");
    let uri = format!("{id}.dkr.ecr.us-east-1.amazonaws.com/{repository}");
    assert_eq!(stdout, format!("{uri}@{digest}\n"), "{stderr}");
    assert_eq!(
        requests(metrics, "blob_upload", "post", "202") - uploads_before,
        2,
        "the config and the layer were uploaded: {stderr}"
    );

    // The repository, as ECR describes it: created with the secure defaults.
    let ecr = aws_sdk_ecr::Client::new(&account.sdk);
    let described = ecr
        .describe_repositories()
        .repository_names(&repository)
        .send()
        .await
        .unwrap();
    let repo = &described.repositories()[0];
    assert_eq!(repo.repository_uri(), Some(uri.as_str()));
    assert_eq!(
        repo.image_tag_mutability().map(|m| m.as_str()),
        Some("IMMUTABLE")
    );
    assert_eq!(
        repo.image_scanning_configuration()
            .map(|c| c.scan_on_push()),
        Some(true)
    );
    assert_eq!(
        repo.encryption_configuration()
            .map(|c| c.encryption_type().as_str()),
        Some("AES256")
    );

    // Read back with the token ECR hands out, at the endpoint it names.
    let auth = ecr.get_authorization_token().send().await.unwrap();
    let data = &auth.authorization_data()[0];
    let token = data.authorization_token().unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token)
        .unwrap();
    assert!(decoded.starts_with(b"AWS:"));
    let endpoint = data.proxy_endpoint().unwrap();
    let (content_type, manifest) = get(
        &format!("{endpoint}/v2/{repository}/manifests/push-e2e"),
        token,
        DOCKER_MANIFEST,
    );
    assert_eq!(content_type, DOCKER_MANIFEST);
    assert_eq!(sha256(&manifest), digest, "the tag names the built image");
    assert!(
        manifest == std::fs::read(image.join("oci/blobs/sha256").join(&digest[7..])).unwrap(),
        "the manifest comes back byte for byte"
    );
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    let mut blobs = vec![manifest["config"]["digest"].as_str().unwrap().to_string()];
    for layer in manifest["layers"].as_array().unwrap() {
        blobs.push(layer["digest"].as_str().unwrap().to_string());
    }
    for blob in &blobs {
        let (_, bytes) = get(
            &format!("{endpoint}/v2/{repository}/blobs/{blob}"),
            token,
            "*/*",
        );
        assert_eq!(&sha256(&bytes), blob);
    }
    let (_, by_digest) = get(
        &format!("{endpoint}/v2/{repository}/manifests/{digest}"),
        token,
        DOCKER_MANIFEST,
    );
    assert_eq!(sha256(&by_digest), digest);

    // Again: every blob is found by HEAD, none uploaded; the repository is
    // found, not created again.
    let (uploads, found) = (
        requests(metrics, "blob_upload", "post", "202"),
        requests(metrics, "blob", "head", "200"),
    );
    let (ok, again, stderr) = push(dir.path(), &id, &["--repository", &repository]);
    assert!(ok, "{stderr}");
    assert_eq!(again, stdout);
    assert_eq!(
        requests(metrics, "blob_upload", "post", "202"),
        uploads,
        "nothing uploaded: {stderr}"
    );
    assert!(
        requests(metrics, "blob", "head", "200") >= found + 2,
        "both blobs were asked for with HEAD"
    );
    assert_eq!(count(&account, "CreateRepository"), 1);
    assert_eq!(count(&account, "DescribeRepositories"), 3); // two pushes, one check here
    assert_eq!(count(&account, "GetAuthorizationToken"), 3);

    // The token never reaches the log, even at RUST_LOG=trace (the SDK's
    // TRACE events carry raw response bodies).
    let traced = Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir.path())
        .env("AWS_ACCESS_KEY_ID", &id)
        .env("RUST_LOG", "trace")
        .args(["image", "push", "--repository", &repository])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&traced.stderr);
    assert!(traced.status.success(), "{log}");
    assert!(log.contains("GetAuthorizationToken"), "traced: {log}");
    let password = String::from_utf8_lossy(&decoded[4..]).into_owned();
    assert!(
        !log.contains(token) && !log.contains(&password),
        "the ECR token is in the trace log"
    );
}

/// Without --repository, the image goes to the repository it was built as
/// (`kfaws image build --tag HOST:PORT/PATH:TAG`), less the registry host,
/// which ECR decides; a note says where it went instead of that host.
#[tokio::test(flavor = "multi_thread")]
async fn push_without_repository_uses_the_name_the_image_was_built_as() {
    let _uploads = UPLOADS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let id = fresh_account();
    let built = format!("registry.example.com:5000/e2e-{id}/named:v7");
    build(dir.path(), &built);
    let digest = local_digest(&dir.path().join("kfaws-trainer-image"));
    let (ok, stdout, stderr) = push(dir.path(), &id, &[]);
    assert!(ok, "{stderr}");
    let registry = format!("{id}.dkr.ecr.us-east-1.amazonaws.com");
    assert_eq!(
        stdout,
        format!("{registry}/e2e-{id}/named@{digest}\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("Pushed e2e-{id}/named:v7:"))
            && stderr.contains(&format!(
                "Note: the image was built as {built}; it was pushed to {registry}, the ECR \
                 registry of this account and region, not to registry.example.com:5000"
            )),
        "{stderr}"
    );

    // A built name Docker allows but ECR does not: refused before any call,
    // naming the built reference and the flag that overrides it.
    let other = fresh_account();
    build(dir.path(), "localhost/a__b:1");
    let (ok, _, stderr) = push(dir.path(), &other, &[]);
    assert!(!ok);
    assert!(
        stderr.contains("the image was built as localhost/a__b:1, and \"a__b\" is not a valid ECR")
            && stderr.contains("pass --repository NAME")
            && !stderr.contains("--repository \"a__b\""),
        "{stderr}"
    );
    let calls = control(&format!("calls?account_id={other}"), "GET", "");
    assert_eq!(
        serde_json::from_str::<Value>(&calls).unwrap(),
        serde_json::json!([])
    );
}

/// `kfaws train --backend` reads the trainer backends `kfaws image build`
/// labelled the image with back from the registry, through the pushed
/// reference and through a reference giving both a tag and the digest (the
/// digest names the image; the tag is not part of the repository).
#[tokio::test(flavor = "multi_thread")]
async fn the_backends_label_is_read_back_from_the_pushed_image() {
    use kfaws::image::inspect::trainer_backends;
    let _uploads = UPLOADS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), "kfaws-trainer:backends");
    let id = fresh_account();
    let account = Account::new(&id).await;
    let repository = format!("backends-{id}/trainer");
    let (ok, stdout, stderr) = push(dir.path(), &id, &["--repository", &repository]);
    assert!(ok, "{stderr}");
    let uri = stdout.trim();
    let version = StdCommand::new(trainer())
        .arg("--version")
        .output()
        .unwrap();
    let expected = kfaws::train::trainer_backends(&String::from_utf8_lossy(&version.stdout));
    assert!(expected.is_some(), "{version:?}");
    assert_eq!(trainer_backends(&account.sdk, uri).await.unwrap(), expected);
    let (name, digest) = uri.split_once('@').unwrap();
    let tagged = format!("{name}:backends@{digest}");
    assert_eq!(
        trainer_backends(&account.sdk, &tagged).await.unwrap(),
        expected,
        "{tagged}"
    );
}

#[test]
fn bad_input_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let id = fresh_account();
    let cases: [(&[&str], &str); 6] = [
        (&["--repository", "Kfaws-Trainer"], "--repository"),
        (&["--repository", "x"], "--repository"),
        (&["--repository", "team//trainer"], "--repository"),
        (&["--repository", "a__b"], "--repository"),
        (&["--tag=-1"], "--tag"),
        (&["--tag", &"t".repeat(129)], "--tag"),
    ];
    for (args, field) in cases {
        let (ok, stdout, stderr) = push(dir.path(), &id, args);
        assert!(!ok, "{args:?} was accepted: {stdout}");
        assert!(
            stderr.contains(field),
            "{args:?}: the error names {field}: {stderr}"
        );
    }
    // No image where --image points (nothing built here).
    let (ok, _, stderr) = push(dir.path(), &id, &[]);
    assert!(!ok);
    assert!(
        stderr.contains("kfaws-trainer-image") && stderr.contains("kfaws image build"),
        "{stderr}"
    );
    let calls = control(&format!("calls?account_id={id}"), "GET", "");
    assert_eq!(
        serde_json::from_str::<Value>(&calls).unwrap(),
        serde_json::json!([]),
        "no AWS call was made"
    );
}

#[test]
fn a_refused_token_call_is_reported_and_nothing_is_pushed() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), "kfaws-trainer:denied");
    let id = fresh_account();
    let repository = format!("denied-{id}/trainer");
    // As for a principal without ecr:GetAuthorizationToken.
    control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"ecr","operation":"GetAuthorizationToken","kind":"server_error","code":"AccessDeniedException","status":400,"message":"not authorized to perform ecr:GetAuthorizationToken","count":null,"account_id":"{id}"}}"#
        ),
    );
    let (ok, stdout, stderr) = push(dir.path(), &id, &["--repository", &repository]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("ECR GetAuthorizationToken: AccessDeniedException"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "no reference printed: {stdout}");
    // The registry has no manifest for the tag.
    let reg = registry();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        reg["username"].as_str().unwrap(),
        reg["password"].as_str().unwrap()
    ));
    let out = StdCommand::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-K", "-"])
        .arg(format!(
            "{}/v2/{repository}/manifests/denied",
            reg["url"].as_str().unwrap()
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            writeln!(
                child.stdin.take().unwrap(),
                "header = \"Authorization: Basic {auth}\""
            )?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    control(&format!("faults?account_id={id}"), "DELETE", "");
}

#[test]
fn an_immutable_tag_is_not_moved_to_another_image() {
    let _uploads = UPLOADS.blocking_lock();
    let account = fresh_account();
    let repo = format!("kfaws-moved-{account}");
    let first = tempfile::tempdir().unwrap();
    build(first.path(), "trainer:v1");
    let (ok, _, err) = push(first.path(), &account, &["--repository", &repo]);
    assert!(ok, "{err}");
    // Another binary under the same tag: ECR would refuse the manifest
    // (ImageTagAlreadyExistsException); kfaws says so before uploading.
    let second = tempfile::tempdir().unwrap();
    // Another build of the trainer: the same binary with a byte appended.
    let other = second.path().join("kfaws-trainer");
    let mut bytes = std::fs::read(trainer()).unwrap();
    bytes.push(0);
    std::fs::write(&other, bytes).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(second.path())
        .args(["image", "build", "--tag", "trainer:v1", "--trainer"])
        .arg(&other)
        .assert()
        .success();
    let (ok, _, err) = push(second.path(), &account, &["--repository", &repo]);
    assert!(!ok, "the tag moved");
    assert!(
        err.contains("tag \"v1\"") && err.contains("already names") && err.contains("--tag"),
        "{err}"
    );
    let (ok, out, err) = push(
        second.path(),
        &account,
        &["--repository", &repo, "--tag", "v2"],
    );
    assert!(ok, "{err}");
    assert!(
        out.trim()
            .ends_with(&local_digest(&second.path().join("kfaws-trainer-image"))),
        "{out}"
    );
}

/// The first interrupt stops the push after the call in flight: here the
/// registry token request (slowed down), so the repository exists but no blob
/// and no tag were written; a second push uploads every blob.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_stops_the_push_before_its_next_step() {
    let _uploads = UPLOADS.lock().await;
    let account = fresh_account();
    let repo = format!("kfaws-stopped-{account}");
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), "trainer:v1");
    control(
        "faults",
        "POST",
        &format!(
            r#"{{"service":"ecr","operation":"GetAuthorizationToken","kind":"latency","latency_ms":3000,"count":1,"account_id":"{account}"}}"#
        ),
    );
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("kfaws"))
        .current_dir(dir.path())
        .env("AWS_ACCESS_KEY_ID", &account)
        .args(["image", "push", "--repository", &repo])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupted once the token request is in flight (the emulator counts a call when it
    // arrives, before its injected latency): not after a fixed time, which a loaded machine
    // may spend before the request is sent.
    let calls = Account::new(&account).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count(&calls, "GetAuthorizationToken") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no GetAuthorizationToken in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    common::signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("the push stops after the call in flight")
            && stderr.contains("Stopped: interrupted before uploading blob sha256:")
            && stderr.contains("0 blob(s) uploaded, no tag written"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no reference printed");
    assert_eq!(count(&calls, "CreateRepository"), 1);
    let (ok, _, err) = push(dir.path(), &account, &["--repository", &repo]);
    assert!(ok, "{err}");
    assert!(
        err.contains("2 blob(s) uploaded, 0 already in the registry")
            && !err.contains("created the repository"),
        "{err}"
    );
}
