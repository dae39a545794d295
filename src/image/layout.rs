//! Writing a built image: an OCI image layout directory (OCI Image Layout
//! Specification v1.0: `oci-layout`, `index.json`, `blobs/sha256/<hex>`)
//! and a `docker load` tarball holding the same layout plus Docker's
//! `manifest.json` (the format `docker save` writes since Docker 25).
//! Both are reproducible: the tarball's entries are sorted, owned by root
//! and dated at the epoch.

use std::path::Path;

use serde_json::json;

use super::layer::{header, parent_dirs};
use super::manifest::MANIFEST_MEDIA_TYPE;
use super::{digest, io_error, Image, ImageError};

/// `index.json` annotation naming the image's tag (OCI Image Spec,
/// "Pre-Defined Annotation Keys").
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// `index.json` annotation holding the image's whole reference
/// (`[HOST[:PORT]/]NAME:TAG`), as containerd's image export writes it
/// beside [`REF_NAME`] and its import reads it back (containerd,
/// `images.AnnotationImageName`).
pub const IMAGE_NAME: &str = "io.containerd.image.name";

/// The parts of an image reference `[HOST[:PORT]/]NAME[:TAG]`, split as
/// the Docker reference grammar does (distribution/reference,
/// `reference.go`, `splitDockerDomain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    /// The registry host (with its port): the first `/`-separated component
    /// when it holds a `.` or `:` or is `localhost`.
    pub host: Option<&'a str>,
    /// The repository path, e.g. `team/kfaws-trainer`.
    pub path: &'a str,
    /// The tag: what follows the last `:` after the host.
    pub tag: Option<&'a str>,
}

impl<'a> Reference<'a> {
    /// Splits `reference`; checks nothing (see `kfaws image build`'s tag check).
    pub fn split(reference: &'a str) -> Self {
        let (name, tag) = match reference.rsplit_once(':') {
            Some((name, t)) if !t.contains('/') => (name, Some(t)),
            _ => (reference, None),
        };
        let (host, path) = match name.split_once('/') {
            Some((host, path)) if host.contains(['.', ':']) || host == "localhost" => {
                (Some(host), path)
            }
            _ => (None, name),
        };
        Self { host, path, tag }
    }
}

fn blob_path(d: &str) -> String {
    format!("blobs/sha256/{}", d.trim_start_matches("sha256:"))
}

/// The files of the OCI layout of `image` named `reference`
/// (`[HOST[:PORT]/]NAME:TAG`), as (path, bytes), sorted by path.
fn layout_files(image: &Image, reference: &str) -> Vec<(String, Vec<u8>)> {
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": image.manifest_digest(),
            "size": image.manifest.len(),
            "annotations": {
                REF_NAME: Reference::split(reference).tag.unwrap_or_default(),
                IMAGE_NAME: reference,
            },
        }],
    });
    let mut files = vec![
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        (
            "index.json".to_string(),
            serde_json::to_vec(&index).expect("JSON values serialize"),
        ),
    ];
    for blob in [&image.layer, &image.config, &image.manifest] {
        files.push((blob_path(&digest(blob)), blob.clone()));
    }
    files.sort();
    files
}

/// Writes the OCI image layout of `image` named `reference`
/// (`[HOST[:PORT]/]NAME:TAG`: its tag in [`REF_NAME`], the whole of it in
/// [`IMAGE_NAME`]) into `dir` (created if missing; files of an earlier
/// build are replaced, other blobs are left).
///
/// # Errors
/// [`ImageError::Io`].
pub fn write_oci_layout(dir: &Path, image: &Image, reference: &str) -> Result<(), ImageError> {
    for (path, bytes) in layout_files(image, reference) {
        let target = dir.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        std::fs::write(&target, bytes).map_err(io_error(&target))?;
    }
    Ok(())
}

/// Writes a `docker load` tarball of `image` named `repo_tag`
/// (`name:tag`) to `path`.
///
/// # Errors
/// [`ImageError::Io`].
pub fn write_docker_archive(path: &Path, image: &Image, repo_tag: &str) -> Result<(), ImageError> {
    let mut files = layout_files(image, repo_tag);
    let manifest = json!([{
        "Config": blob_path(&digest(&image.config)),
        "RepoTags": [repo_tag],
        "Layers": [blob_path(&digest(&image.layer))],
    }]);
    files.push((
        "manifest.json".into(),
        serde_json::to_vec(&manifest).expect("JSON values serialize"),
    ));
    files.sort();
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    let dirs = parent_dirs(files.iter().map(|(p, _)| p.as_str()));
    for d in &dirs {
        let mut h = header(0, 0o755, tar::EntryType::Directory);
        tar.append_data(&mut h, d, std::io::empty())
            .map_err(io_error(path))?;
    }
    for (p, bytes) in &files {
        let mut h = header(bytes.len() as u64, 0o644, tar::EntryType::Regular);
        tar.append_data(&mut h, p, bytes.as_slice())
            .map_err(io_error(path))?;
    }
    let bytes = tar.into_inner().map_err(io_error(path))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    std::fs::write(path, bytes).map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::Reference;

    #[test]
    fn references_split_into_host_path_and_tag_as_docker_splits_them() {
        let split = |r| {
            let Reference { host, path, tag } = Reference::split(r);
            (host, path, tag)
        };
        assert_eq!(split("kfaws-trainer:1"), (None, "kfaws-trainer", Some("1")));
        assert_eq!(split("team/trainer:1"), (None, "team/trainer", Some("1")));
        assert_eq!(
            split("registry:5000/team/trainer:v7"),
            (Some("registry:5000"), "team/trainer", Some("v7"))
        );
        assert_eq!(
            split("1234.dkr.ecr.us-east-1.amazonaws.com/t:0.1.0"),
            (
                Some("1234.dkr.ecr.us-east-1.amazonaws.com"),
                "t",
                Some("0.1.0")
            )
        );
        assert_eq!(split("localhost/a"), (Some("localhost"), "a", None));
        // The port's colon is not a tag separator.
        assert_eq!(
            split("registry:5000/trainer"),
            (Some("registry:5000"), "trainer", None)
        );
    }
}
