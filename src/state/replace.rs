//! Replacing a file's content atomically: the bytes go to a temporary file
//! in the destination's directory (mode 0600), which is fsynced and renamed
//! over the destination, then the directory is fsynced (rename(2) is atomic
//! within one file system; POSIX.1-2017, rename). A crash leaves the old
//! content or the new, never a mix.
//!
//! A rename replaces the directory entry, so two kinds of destination need
//! care: a symbolic link is followed (the file it points to gets the new
//! content and the link stays, as `kubectl config` and editors do), and
//! anything other than a regular file (a device such as `/dev/null`, a FIFO,
//! a socket, a directory) is refused rather than replaced. The directory is
//! never created here: the caller decides whether a missing one is an error
//! (`plan -out`) or is made ([`super::store::create_private_dir`]).

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` atomically, following a symbolic link at `path`.
/// `prefix` starts the temporary file's name (e.g. `.state-`).
///
/// # Errors
/// The path that failed and why: a symbolic link whose target does not
/// exist (`NotFound`), a destination that is not a regular file
/// (`InvalidInput`), a missing directory or any other I/O error.
pub fn replace_file(path: &Path, bytes: &[u8], prefix: &str) -> Result<(), (PathBuf, io::Error)> {
    let target = destination(path).map_err(|e| (path.to_path_buf(), e))?;
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // tempfile creates the file with mode 0600 on Unix.
    let mut tmp = tempfile::Builder::new()
        .prefix(prefix)
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| {
            // tempfile's error names the temporary file, which was never
            // made; say what is wrong with the directory instead.
            let e = if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(io::ErrorKind::NotFound, "no such directory")
            } else {
                io::Error::new(
                    e.kind(),
                    format!("cannot create a file in it: {}", e.kind()),
                )
            };
            (dir.clone(), e)
        })?;
    tmp.write_all(bytes)
        .map_err(|e| (tmp.path().to_path_buf(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| (tmp.path().to_path_buf(), e))?;
    tmp.persist(&target)
        .map_err(|e| (target.clone(), e.error))?;
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| (dir, e))
}

/// Refuses `path` when it exists (through a symbolic link too) and is not a
/// regular file, without opening it (opening a FIFO blocks until a writer
/// comes). A missing `path` passes.
///
/// # Errors
/// `InvalidInput` naming what `path` resolves to; any other metadata error.
pub fn ensure_regular(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file (a directory, device, FIFO or socket); kfaws reads and \
                 writes only regular files, replacing them atomically",
                path.display()
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The file a write to `path` must replace: `path` itself, or the file a
/// symbolic link at `path` resolves to.
fn destination(path: &Path) -> io::Result<PathBuf> {
    let target = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => fs::canonicalize(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("is a symbolic link whose target cannot be resolved: {e}"),
            )
        })?,
        Ok(_) => path.to_path_buf(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(e),
    };
    ensure_regular(&target)?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::replace_file;
    use std::fs;

    #[test]
    fn a_symbolic_link_is_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::write(&real, "old").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        replace_file(&link, b"new", ".t-").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for path in [fifo.clone(), dir.path().to_path_buf()] {
            let (failed, e) = replace_file(&path, b"x", ".t-").unwrap_err();
            assert_eq!(failed, path);
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains("is not a regular file"), "{e}");
        }
        use std::os::unix::fs::FileTypeExt as _;
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_missing_directory_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing/plan");
        let (failed, e) = replace_file(&path, b"x", ".t-").unwrap_err();
        assert_eq!(failed, dir.path().join("missing"));
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            "no such directory",
            "not the temporary file's path"
        );
        assert!(!dir.path().join("missing").exists());
    }

    #[test]
    fn a_dangling_link_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("gone/x"), &link).unwrap();
        let (_, e) = replace_file(&link, b"x", ".t-").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
