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

/// Writes `bytes` to `path` atomically, following a symbolic link at `path`
/// (one whose target does not exist yet creates it). `prefix` starts the
/// temporary file's name (e.g. `.state-`).
///
/// # Errors
/// The path that failed and why: a destination that is not a regular file or
/// a loop of symbolic links (`InvalidInput`), a missing directory or any
/// other I/O error.
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
/// symbolic link at `path` resolves to, through a chain of links, each
/// relative to its own directory. A link whose target does not exist yet
/// (a dangling one) names the file to create, as open(2) with `O_CREAT`
/// follows it (and kubectl writes through it), provided every link on the
/// way is this user's: a file is never created through another user's link
/// (one planted in a shared directory such as `/tmp` could otherwise make
/// kfaws create a file anywhere this user may write; the kernel's
/// `protected_symlinks` does not apply to links resolved here).
///
/// # Errors
/// `InvalidInput` for a target that is not a regular file, for more than
/// [`MAX_LINKS`] links in a row (a loop), or for a missing target behind
/// another user's link; any other metadata error.
pub fn destination(path: &Path) -> io::Result<PathBuf> {
    destination_for(path, nix::unistd::getuid().as_raw())
}

/// [`destination`] for the user `uid`.
fn destination_for(path: &Path, uid: u32) -> io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let mut at = path.to_path_buf();
    let mut foreign = None;
    for _ in 0..=MAX_LINKS {
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if meta.uid() != uid {
                    foreign.get_or_insert((at.clone(), meta.uid()));
                }
                let next = fs::read_link(&at)?;
                // An absolute `next` replaces the whole path.
                at = at
                    .parent()
                    .map_or_else(|| next.clone(), |dir| dir.join(&next));
            }
            Ok(_) => {
                ensure_regular(&at)?;
                return Ok(at);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match foreign {
                    None => Ok(at),
                    Some((link, owner)) => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "leads through {}, a symbolic link of another user (uid {owner}), to \
                             {}, which does not exist: kfaws creates no file through another \
                             user's link",
                            link.display(),
                            at.display()
                        ),
                    )),
                };
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "is a chain of more than {MAX_LINKS} symbolic links (a loop?), ending at {}",
            at.display()
        ),
    ))
}

/// The most symbolic links followed in a row: Linux's limit for a path
/// lookup (path_resolution(7): `ELOOP` after 40).
const MAX_LINKS: usize = 40;

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
    fn a_dangling_link_is_written_through_and_a_loop_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Relative to the link's own directory, through a second link.
        fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("sub/inner")).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("sub/inner", &link).unwrap();
        replace_file(&link, b"new", ".t-").unwrap();
        assert_eq!(fs::read(dir.path().join("sub/real")).unwrap(), b"new");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink("loop", &looped).unwrap();
        let (_, e) = replace_file(&looped, b"x", ".t-").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("symbolic links (a loop?)"), "{e}");
    }

    #[test]
    fn a_missing_file_is_not_created_through_another_user_s_link() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("target", &link).unwrap();
        let owner = fs::symlink_metadata(&link).unwrap().uid();
        // As seen by another user than the link's.
        let e = super::destination_for(&link, owner.wrapping_add(1)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("a symbolic link of another user (uid {owner})")),
            "{e}"
        );
        // An existing target is written through it, as before; the owner's own link creates.
        fs::write(dir.path().join("target"), "old").unwrap();
        let to = super::destination_for(&link, owner.wrapping_add(1)).unwrap();
        assert_eq!(to, dir.path().join("target"));
        fs::remove_file(dir.path().join("target")).unwrap();
        assert_eq!(
            super::destination_for(&link, owner).unwrap(),
            dir.path().join("target")
        );
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
    fn a_dangling_link_into_a_missing_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("gone/x"), &link).unwrap();
        let (failed, e) = replace_file(&link, b"x", ".t-").unwrap_err();
        assert_eq!(failed, dir.path().join("gone"));
        assert!(e.to_string().contains("no such directory"), "{e}");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
