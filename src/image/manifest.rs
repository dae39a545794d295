//! The image config and the manifest, in the Docker image manifest v2,
//! schema 2 format (Docker Registry HTTP API v2 docs, "Image Manifest
//! Version 2, Schema 2"; the config follows the Docker image specification
//! v1.2, which the OCI image config matches field for field).
//!
//! Both are serialized compactly with sorted keys, and carry no build time
//! (`created` is the epoch), so they are reproducible.

use serde_json::json;

use super::{digest, BINARY_PATH};

/// The manifest's media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The config's media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.docker.container.image.v1+json";
/// The layer's media type (gzip-compressed tar).
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The image label naming the trainer's collective backends, space-separated
/// (`gloo nccl`). Reverse-DNS as the OCI image spec asks of label keys
/// ("Annotations": "SHOULD be namespaced with a reverse domain notation").
pub const BACKENDS_LABEL: &str = "io.kfaws.trainer.backends";

/// The image's `architecture` (OCI image config, Go's `GOARCH` value for
/// x86-64): [`super::elf`] refuses a binary or library built for another.
pub const ARCHITECTURE: &str = "amd64";

/// `created` of the config and its history: the epoch, for reproducibility.
const CREATED: &str = "1970-01-01T00:00:00Z";

/// The image config for a single layer whose uncompressed digest is
/// `diff_id`. Entrypoint `/usr/local/bin/kfaws-trainer`: SageMaker runs a
/// training image as `docker run IMAGE train` and an inference image as
/// `docker run IMAGE serve` (SageMaker Developer Guide, "How Amazon
/// SageMaker runs your training image" / "... inference code"), which
/// become `kfaws-trainer train` and `kfaws-trainer serve`; the PyTorchJob
/// gives the same arguments. Port 8080 is the inference contract's.
///
/// `backends` is the trainer's collective backends, from its `--version`
/// (`["gloo"]`, or `["gloo", "nccl"]` for a CUDA build), recorded as the
/// label [`BACKENDS_LABEL`] (space-separated) so `kfaws train` can refuse
/// `--backend nccl` with an image that lacks it before a job is created;
/// `None` (a binary this machine cannot run) records no label.
pub fn config(diff_id: &str, backends: Option<&[String]>) -> Vec<u8> {
    let mut labels = json!({
        "org.opencontainers.image.title": "kfaws-trainer",
        "org.opencontainers.image.version": env!("CARGO_PKG_VERSION"),
    });
    if let Some(b) = backends {
        labels[BACKENDS_LABEL] = json!(b.join(" "));
    }
    let config = json!({
        "architecture": ARCHITECTURE,
        "os": "linux",
        "created": CREATED,
        "config": {
            "Entrypoint": [format!("/{BINARY_PATH}")],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "WorkingDir": "/",
            "ExposedPorts": {"8080/tcp": {}},
            "Labels": labels,
        },
        "history": [{"created": CREATED, "created_by": "kfaws image build"}],
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    });
    serde_json::to_vec(&config).expect("JSON values serialize")
}

/// The schema-2 manifest of `config` and the gzip `layer`.
pub fn manifest(config: &[u8], layer: &[u8]) -> Vec<u8> {
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "size": config.len(),
            "digest": digest(config),
        },
        "layers": [{
            "mediaType": LAYER_MEDIA_TYPE,
            "size": layer.len(),
            "digest": digest(layer),
        }],
    });
    serde_json::to_vec(&manifest).expect("JSON values serialize")
}
