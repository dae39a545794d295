//! `kfaws image build` end to end on the real trainer binary: reproducible
//! digests, Docker v2 schema 2 media types, an OCI layout whose every
//! descriptor matches its blob, a `docker load` tarball that skopeo reads,
//! and a layer from which the trainer actually runs with only the
//! libraries the layer holds.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn trainer() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("kfaws").with_file_name("kfaws-trainer");
    assert!(
        bin.is_file(),
        "{} is built with the workspace (cargo test --workspace)",
        bin.display()
    );
    bin
}

fn build(dir: &Path, extra: &[&str]) -> String {
    let out = Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir)
        .args(["image", "build", "--trainer"])
        .arg(trainer())
        .args(extra)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn blob(oci: &Path, digest: &str) -> Vec<u8> {
    std::fs::read(
        oci.join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
    )
    .unwrap()
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn the_same_binary_gives_the_same_image_byte_for_byte() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = build(a.path(), &[]);
    let second = build(b.path(), &[]);
    let digest = |s: &str| {
        s.split_whitespace()
            .find(|w| w.starts_with("sha256:"))
            .unwrap()
            .to_string()
    };
    assert_eq!(digest(&first), digest(&second), "{first}\n{second}");
    let archive = |d: &Path| std::fs::read(d.join("kfaws-trainer-image/image.tar")).unwrap();
    assert!(archive(a.path()) == archive(b.path()), "image.tar differs");
}

#[test]
fn every_descriptor_matches_its_blob_with_docker_schema_2_media_types() {
    let dir = tempfile::tempdir().unwrap();
    let printed = build(dir.path(), &["--tag", "trainer:t1"]);
    let oci = dir.path().join("kfaws-trainer-image/oci");
    assert_eq!(
        json(&std::fs::read(oci.join("oci-layout")).unwrap())["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&std::fs::read(oci.join("index.json")).unwrap());
    let desc = &index["manifests"][0];
    assert_eq!(
        desc["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    assert_eq!(
        desc["annotations"]["org.opencontainers.image.ref.name"],
        "t1"
    );
    // The whole reference, as containerd's export writes it.
    assert_eq!(
        desc["annotations"]["io.containerd.image.name"],
        "trainer:t1"
    );
    let digest = desc["digest"].as_str().unwrap();
    assert!(printed.contains(digest), "{printed}");
    let manifest_bytes = blob(&oci, digest);
    assert_eq!(sha256(&manifest_bytes), digest);
    assert_eq!(desc["size"], manifest_bytes.len());
    let manifest = json(&manifest_bytes);
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.docker.container.image.v1+json"
    );
    let config_bytes = blob(&oci, manifest["config"]["digest"].as_str().unwrap());
    assert_eq!(sha256(&config_bytes), manifest["config"]["digest"]);
    assert_eq!(manifest["config"]["size"], config_bytes.len());
    let layer_desc = &manifest["layers"][0];
    assert_eq!(
        layer_desc["mediaType"],
        "application/vnd.docker.image.rootfs.diff.tar.gzip"
    );
    let layer = blob(&oci, layer_desc["digest"].as_str().unwrap());
    assert_eq!(sha256(&layer), layer_desc["digest"]);
    assert_eq!(layer_desc["size"], layer.len());
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(layer.as_slice())
        .read_to_end(&mut tar)
        .unwrap();
    let config = json(&config_bytes);
    assert_eq!(config["rootfs"]["diff_ids"][0], sha256(&tar), "diff_id");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/kfaws-trainer"])
    );
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["os"], "linux");
    // The trainer's collective backends, as its --version names them, are a label that
    // `kfaws train --backend` reads back from the registry.
    let version = std::process::Command::new(trainer())
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let (_, backends) = version.split_once("(backends: ").expect(&version);
    let (backends, _) = backends.split_once(')').unwrap();
    assert_eq!(
        config["config"]["Labels"]["io.kfaws.trainer.backends"], backends,
        "{config}"
    );

    // Every entry root-owned, at the epoch; the binary executable.
    let mut entries = tar::Archive::new(tar.as_slice());
    let mut names = Vec::new();
    for e in entries.entries().unwrap() {
        let e = e.unwrap();
        let h = e.header();
        assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
        assert_eq!(h.mtime().unwrap(), 0);
        let name = e.path().unwrap().display().to_string();
        if name == "usr/local/bin/kfaws-trainer" {
            assert_eq!(h.mode().unwrap() & 0o777, 0o755);
        }
        names.push(name);
    }
    assert!(names.contains(&"usr/local/bin/kfaws-trainer".to_string()));
    assert!(
        names.iter().any(|n| n.ends_with("/libc.so.6")),
        "glibc is in the layer: {names:?}"
    );
}

#[test]
fn the_trainer_runs_from_the_layer_with_only_its_libraries() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), &[]);
    let oci = dir.path().join("kfaws-trainer-image/oci");
    let index = json(&std::fs::read(oci.join("index.json")).unwrap());
    let manifest = json(&blob(
        &oci,
        index["manifests"][0]["digest"].as_str().unwrap(),
    ));
    let layer = blob(&oci, manifest["layers"][0]["digest"].as_str().unwrap());
    let root = dir.path().join("rootfs");
    tar::Archive::new(flate2::read::GzDecoder::new(layer.as_slice()))
        .unpack(&root)
        .unwrap();
    // The image's own loader, told to look only in the image's library
    // directory: a library missing from the layer makes this fail.
    let out = StdCommand::new(root.join("lib64/ld-linux-x86-64.so.2"))
        .arg("--inhibit-cache")
        .arg("--library-path")
        .arg(root.join("lib/x86_64-linux-gnu"))
        .arg(root.join("usr/local/bin/kfaws-trainer"))
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("train"));
}

#[test]
fn skopeo_reads_the_docker_archive() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), &["--tag", "kfaws-trainer:e2e"]);
    let archive = dir.path().join("kfaws-trainer-image/image.tar");
    let out = StdCommand::new("skopeo")
        .arg("inspect")
        .arg(format!("docker-archive:{}", archive.display()))
        .output()
        .expect("skopeo is installed (make deps)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspected = json(&out.stdout);
    assert_eq!(inspected["Architecture"], "amd64");
    assert_eq!(
        inspected["Labels"]["org.opencontainers.image.title"],
        "kfaws-trainer"
    );
    // Copying verifies every blob against its digest.
    let copy = dir.path().join("copy");
    let out = StdCommand::new("skopeo")
        .arg("copy")
        .arg(format!("docker-archive:{}", archive.display()))
        .arg(format!("dir:{}", copy.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kfaws image build ARGS` in `dir`, which must exit 1; its stderr.
fn build_refused(dir: &Path, args: &[&std::ffi::OsStr]) -> String {
    let err = Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir)
        .args(["image", "build"])
        .args(args)
        .assert()
        .code(1)
        .get_output()
        .stderr
        .clone();
    String::from_utf8(err).unwrap()
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("not-a-binary");
    std::fs::write(&text, "#!/bin/sh\necho hi\n").unwrap();
    let err = build_refused(dir.path(), &["--trainer".as_ref(), text.as_os_str()]);
    assert!(err.contains("not a 64-bit ELF file"), "{err}");
    // An executable that is not the trainer: every training job would fail.
    let err = build_refused(dir.path(), &["--trainer".as_ref(), "/bin/ls".as_ref()]);
    assert!(
        err.contains("/bin/ls is not the kfaws trainer") && err.contains("ls (GNU coreutils)"),
        "{err}"
    );
    // The trainer's own bytes, its ELF header saying aarch64 (e_machine 183) or a
    // relocatable object file (e_type 1): neither could run in a linux/amd64 image.
    let original = std::fs::read(trainer()).unwrap();
    for (offset, value, expected) in [
        (
            18,
            183u16,
            "built for aarch64 (e_machine 183); the image is linux/amd64",
        ),
        (
            16,
            1u16,
            "a relocatable object file (e_type 1), not a program",
        ),
    ] {
        let mut bytes = original.clone();
        bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
        let patched = dir.path().join("patched-trainer");
        std::fs::write(&patched, &bytes).unwrap();
        let err = build_refused(dir.path(), &["--trainer".as_ref(), patched.as_os_str()]);
        assert!(
            err.contains(&format!("{}: {expected}", patched.display())),
            "{err}"
        );
    }
    let trainer = trainer();
    let err = build_refused(
        dir.path(),
        &[
            "--tag".as_ref(),
            "Trainer_X:1".as_ref(),
            "--trainer".as_ref(),
            trainer.as_os_str(),
        ],
    );
    assert!(err.contains("--tag \"Trainer_X:1\" is invalid"), "{err}");
    assert!(!dir.path().join("kfaws-trainer-image").exists());
}
