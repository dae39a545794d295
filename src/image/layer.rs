//! The image layer: a tar archive with fixed metadata, gzip-compressed.
//!
//! Reproducible: entries sorted by path, parent directories added, every
//! entry owned by root (uid/gid 0, no user or group names) with mtime
//! [`MTIME`], ustar-format headers, and gzip written without a file name or
//! timestamp (RFC 1952 `MTIME` 0) at a fixed compression level. The same
//! files therefore always give the same digest.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::{Compression, GzBuilder};

use super::{digest, io_error, ImageError};

/// The modification time of every entry: the Unix epoch (as
/// `SOURCE_DATE_EPOCH=0`, reproducible-builds.org).
pub const MTIME: u64 = 0;

/// One file of the layer.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its path in the image, relative to `/`.
    pub path: String,
    /// Where its content is read from.
    pub source: PathBuf,
    /// Its permission bits.
    pub mode: u32,
}

impl Entry {
    /// A file at `path` in the image with the content of `source`.
    pub fn file(path: &str, source: &Path, mode: u32) -> Self {
        Self {
            path: path.trim_start_matches('/').to_string(),
            source: source.to_path_buf(),
            mode,
        }
    }
}

/// A built layer.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The uncompressed tar's digest (`diff_id`).
    pub diff_id: String,
    /// The gzip-compressed tar (the layer blob).
    pub gzip: Vec<u8>,
}

/// A ustar header owned by root (uid/gid 0, no names) dated [`MTIME`].
pub(crate) fn header(size: u64, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(MTIME);
    h
}

/// Every parent directory of `paths` (relative paths), as `dir/`, sorted:
/// tar readers create missing parents with their own defaults, so they are
/// written explicitly.
pub(crate) fn parent_dirs<'a>(paths: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for path in paths {
        let mut p = Path::new(path).parent();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(format!("{}/", d.display()));
            p = d.parent();
        }
    }
    dirs
}

/// Builds the layer of `entries`.
///
/// # Errors
/// [`ImageError::Io`] when a source cannot be read.
pub fn build(entries: &[Entry]) -> Result<Layer, ImageError> {
    let mut files: Vec<&Entry> = entries.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
    let dirs = parent_dirs(files.iter().map(|f| f.path.as_str()));
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    for d in &dirs {
        let mut h = header(0, 0o755, tar::EntryType::Directory);
        tar.append_data(&mut h, d, std::io::empty())
            .map_err(io_error(Path::new(d)))?;
    }
    for f in files {
        let data = std::fs::read(&f.source).map_err(io_error(&f.source))?;
        let mut h = header(data.len() as u64, f.mode, tar::EntryType::Regular);
        tar.append_data(&mut h, &f.path, data.as_slice())
            .map_err(io_error(&f.source))?;
    }
    let raw = tar.into_inner().map_err(io_error(Path::new("layer.tar")))?;
    let mut gz: GzEncoder<Vec<u8>> = GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::new(6));
    gz.write_all(&raw)
        .map_err(io_error(Path::new("layer.tar.gz")))?;
    let gzip = gz.finish().map_err(io_error(Path::new("layer.tar.gz")))?;
    Ok(Layer {
        diff_id: digest(&raw),
        gzip,
    })
}
