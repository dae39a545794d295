//! The trainer's container image, built without Docker (issue #6).
//!
//! One layer holding the trainer binary at [`BINARY_PATH`] and exactly the
//! shared libraries it loads ([`elf`]), packed reproducibly ([`layer`]: fixed
//! modification times, owner root, sorted entries, gzip without a timestamp),
//! so the same binary and the same host libraries (the interpreter, libc,
//! libgcc_s, ... copied from this machine) always give the same digests.
//! The binary and every library must be x86-64 ELF (the image is
//! `linux/amd64`), the binary an executable. The manifest and config use
//! the **Docker image manifest v2, schema 2** media types, because
//! SageMaker accepts only those (SageMaker Developer Guide, "Use your own
//! training algorithms": "Docker Image Manifest V2 Schema 2"), and are
//! written twice ([`layout`]): as an OCI image layout directory (OCI Image
//! Layout Specification v1.0) and as a `docker load` tarball.
//!
//! | module | one job |
//! |---|---|
//! | [`elf`] | the program interpreter and `DT_NEEDED` libraries of an ELF executable, resolved and closed transitively |
//! | [`layer`] | the reproducible layer: tar + gzip, its digest and diff id |
//! | [`manifest`] | the image config and the schema-2 manifest, with their digests |
//! | [`layout`] | the OCI layout directory and the `docker load` tarball |
//! | [`push`] | `kfaws image push`: the ECR repository, its token, and the blobs and manifest over the registry API |
//! | [`inspect`] | a pushed image's config read back from ECR: the trainer backends it was built with |

pub mod elf;
pub mod inspect;
pub mod layer;
pub mod layout;
pub mod manifest;
pub mod push;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the trainer binary lives in the image (the entrypoint).
pub const BINARY_PATH: &str = "usr/local/bin/kfaws-trainer";

/// `sha256:<hex>` of `bytes`, the form of OCI and Docker digests (OCI Image
/// Spec, "Digests").
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Why an image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The binary is not an ELF executable this image can run.
    #[error("{}: {problem}", path.display())]
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The binary, its interpreter or a library it loads is built for
    /// another CPU than x86-64 (`e_machine`, System V gABI "ELF Header"):
    /// it could never run in the image, which is `linux/amd64`.
    #[error("{}: built for {machine} (e_machine {e_machine}); the image is linux/{}", path.display(), manifest::ARCHITECTURE)]
    WrongArchitecture {
        /// The file.
        path: PathBuf,
        /// The architecture `e_machine` names, e.g. `aarch64`.
        machine: String,
        /// The ELF header's `e_machine` (62 is `EM_X86_64`).
        e_machine: u16,
    },
    /// The binary is an ELF file but no program (`e_type` neither
    /// `ET_EXEC` nor `ET_DYN`, System V gABI "ELF Header"): e.g. a
    /// relocatable object file (`.o`), which cannot be executed.
    #[error("{}: {kind} (e_type {e_type}), not a program", path.display())]
    NotAProgram {
        /// The file.
        path: PathBuf,
        /// What `e_type` says it is, e.g. `a relocatable object file`.
        kind: String,
        /// The ELF header's `e_type`.
        e_type: u16,
    },
    /// A shared library the binary needs was not found.
    #[error("{} needs {library}, found in none of {}", binary.display(), searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    LibraryNotFound {
        /// The binary or library that needs it.
        binary: PathBuf,
        /// The `DT_NEEDED` name.
        library: String,
        /// The directories searched.
        searched: Vec<PathBuf>,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A built image: its blobs and how they are described.
#[derive(Debug, Clone)]
pub struct Image {
    /// The gzip-compressed layer.
    pub layer: Vec<u8>,
    /// `sha256:` of the uncompressed layer tar (the config's `diff_ids`).
    pub diff_id: String,
    /// The config JSON.
    pub config: Vec<u8>,
    /// The manifest JSON.
    pub manifest: Vec<u8>,
}

impl Image {
    /// Builds the image of `binary`: the binary and its shared libraries
    /// (found under `root`, `/` outside tests) in one layer.
    ///
    /// # Errors
    /// [`ImageError`] when the binary or a library cannot be read, or a
    /// library is not found.
    pub fn build(binary: &Path, root: &Path) -> Result<Self, ImageError> {
        let files = elf::closure(binary, root)?;
        let mut entries = vec![layer::Entry::file(BINARY_PATH, binary, 0o755)];
        for f in &files {
            entries.push(layer::Entry::file(&f.image_path, &f.host_path, 0o755));
        }
        let built = layer::build(&entries)?;
        let config = manifest::config(&built.diff_id, None);
        let manifest = manifest::manifest(&config, &built.gzip);
        Ok(Self {
            layer: built.gzip,
            diff_id: built.diff_id,
            config,
            manifest,
        })
    }

    /// The same image with the trainer's collective `backends` recorded as
    /// a label of its config ([`manifest::config`]); the config and manifest
    /// (hence the digest) change, the layer does not.
    #[must_use]
    pub fn with_backends(self, backends: &[String]) -> Self {
        let config = manifest::config(&self.diff_id, Some(backends));
        let manifest = manifest::manifest(&config, &self.layer);
        Self {
            config,
            manifest,
            ..self
        }
    }

    /// The manifest digest, `sha256:<hex>`: the image's identity
    /// (`repo@sha256:...`).
    pub fn manifest_digest(&self) -> String {
        digest(&self.manifest)
    }
}
