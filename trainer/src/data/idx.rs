//! The IDX format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist, "FILE FORMATS"):
//! a big-endian magic number `0x0000_08NN` (`08` = unsigned byte, `NN` = number of
//! dimensions), one big-endian `u32` per dimension, then the data.

use std::path::{Path, PathBuf};

use super::{open_maybe_gz, DataError, Split};

/// Magic number of an IDX file of `u8` images with 3 dimensions (count, rows, columns).
pub const IDX_IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of `u8` labels with 1 dimension (count).
pub const IDX_LABELS_MAGIC: u32 = 0x0000_0801;

/// Loads `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` from `dir`
/// (`prefix` is `train` or `t10k`). `found` lists the directory's file names, for the error
/// when one is missing.
///
/// # Errors
/// [`DataError::MissingFile`], [`DataError::BadMagic`], [`DataError::WrongSize`] (truncated),
/// [`DataError::CountMismatch`] or [`DataError::BadLabel`], each naming the file.
pub fn load_idx_pair(dir: &Path, prefix: &str, found: &[String]) -> Result<Split, DataError> {
    let images_path = find(dir, &format!("{prefix}-images-idx3-ubyte"), found)?;
    let labels_path = find(dir, &format!("{prefix}-labels-idx1-ubyte"), found)?;
    let (dims, images) = read_idx(&images_path, IDX_IMAGES_MAGIC, "u8 images, 3 dimensions")?;
    let (_, labels) = read_idx(&labels_path, IDX_LABELS_MAGIC, "u8 labels, 1 dimension")?;
    if dims[1] != 28 || dims[2] != 28 {
        return Err(DataError::WrongShape {
            path: images_path,
            dataset: "MNIST/Fashion-MNIST",
            expected: [1, 28, 28],
            found: [1, dims[1], dims[2]],
        });
    }
    if dims[0] != labels.len() {
        return Err(DataError::CountMismatch {
            images: images_path,
            labels: labels_path,
            n_images: dims[0],
            n_labels: labels.len(),
        });
    }
    if let Some((index, &label)) = labels.iter().enumerate().find(|(_, &l)| l >= 10) {
        return Err(DataError::BadLabel {
            path: labels_path,
            index,
            label,
            classes: 10,
        });
    }
    Ok(Split {
        images,
        labels,
        shape: [1, 28, 28],
    })
}

/// The path of `stem` or, when it is absent, `stem.gz` in `dir` (logged: when both exist the
/// uncompressed file is read).
fn find(dir: &Path, stem: &str, found: &[String]) -> Result<PathBuf, DataError> {
    let path = [stem.to_string(), format!("{stem}.gz")]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file());
    if let Some(path) = &path {
        tracing::info!(path = %path.display(), "reading");
    }
    path.ok_or_else(|| DataError::MissingFile {
        path: dir.join(format!("{stem}[.gz]")),
        dataset: "IDX (MNIST/Fashion-MNIST)",
        found: super::found_list(found),
    })
}

/// Reads an IDX file, checking the magic number and that the data is exactly as long as the
/// dimensions say. Returns the dimensions and the data bytes. The file is read (and
/// decompressed) only up to the size its header declares, plus one byte to tell a longer file:
/// a gzip file that decompresses to gigabytes is refused without holding them in memory.
fn read_idx(
    path: &Path,
    magic: u32,
    what: &'static str,
) -> Result<(Vec<usize>, Vec<u8>), DataError> {
    use std::io::Read;
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let wrong_size = |expected: String, found: usize| DataError::WrongSize {
        path: path.to_path_buf(),
        expected,
        found: found as u64,
    };
    let mut reader = open_maybe_gz(path)?;
    let mut read_up_to = |limit: usize| -> Result<Vec<u8>, DataError> {
        let mut out = Vec::new();
        (&mut reader)
            .take(limit as u64)
            .read_to_end(&mut out)
            .map_err(io)?;
        Ok(out)
    };
    let start = read_up_to(4)?;
    let Ok(start4) = <[u8; 4]>::try_from(start.as_slice()) else {
        return Err(wrong_size(
            "at least a 4-byte IDX header".into(),
            start.len(),
        ));
    };
    let found = u32::from_be_bytes(start4);
    if found != magic {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            expected: magic,
            found,
            what,
        });
    }
    let rank = (magic & 0xff) as usize;
    let header = 4 + 4 * rank;
    let dims_bytes = read_up_to(4 * rank)?;
    if dims_bytes.len() != 4 * rank {
        return Err(wrong_size(
            format!("at least a {header}-byte IDX header"),
            4 + dims_bytes.len(),
        ));
    }
    let dims: Vec<usize> = dims_bytes
        .chunks_exact(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let data_len = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|n| n.checked_add(header).is_some())
        .ok_or_else(|| wrong_size(format!("dimensions {dims:?} that fit in memory"), header))?;
    let data = read_up_to(data_len.saturating_add(1))?;
    if data.len() != data_len {
        // Longer than declared: count the rest without keeping it.
        let rest = if data.len() > data_len {
            std::io::copy(&mut reader, &mut std::io::sink()).map_err(io)? as usize
        } else {
            0
        };
        return Err(wrong_size(
            format!(
                "{} ({header}-byte header + {data_len} data bytes for dimensions {dims:?}; \
                 truncated or corrupt file?)",
                header + data_len
            ),
            header + data.len() + rest,
        ));
    }
    Ok((dims, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{load_dir, DatasetKind};

    fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut out = magic.to_be_bytes().to_vec();
        for d in dims {
            out.extend(d.to_be_bytes());
        }
        out.extend(data);
        out
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// Writes a tiny 3-train/2-test IDX dataset; `gzip` picks the compressed names.
    fn write_dataset(dir: &Path, gzip: bool) {
        for (prefix, n) in [("train", 3u32), ("t10k", 2u32)] {
            let pixels: Vec<u8> = (0..n * 784).map(|i| (i % 251) as u8).collect();
            let labels: Vec<u8> = (0..n as u8).collect();
            let files = [
                (
                    format!("{prefix}-images-idx3-ubyte"),
                    idx(IDX_IMAGES_MAGIC, &[n, 28, 28], &pixels),
                ),
                (
                    format!("{prefix}-labels-idx1-ubyte"),
                    idx(IDX_LABELS_MAGIC, &[n], &labels),
                ),
            ];
            for (name, bytes) in files {
                if gzip {
                    std::fs::write(dir.join(format!("{name}.gz")), gz(&bytes)).unwrap();
                } else {
                    std::fs::write(dir.join(name), bytes).unwrap();
                }
            }
        }
    }

    #[test]
    fn reads_plain_and_gzip_idx() {
        for gzip in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            write_dataset(dir.path(), gzip);
            let ds = load_dir(dir.path(), Some(DatasetKind::FashionMnist)).unwrap();
            assert_eq!(ds.kind, DatasetKind::FashionMnist);
            assert_eq!(ds.train.len(), 3);
            assert_eq!(ds.test.len(), 2);
            assert_eq!(ds.train.labels, vec![0, 1, 2]);
            assert_eq!(ds.train.image(1)[0], (784 % 251) as u8);
        }
    }

    /// Overwrites the training images of `dir` (written by [`write_dataset`])
    /// with every pixel `value`.
    fn fill_train_images(dir: &Path, value: u8) {
        let pixels = vec![value; 3 * 784];
        std::fs::write(
            dir.join("train-images-idx3-ubyte"),
            idx(IDX_IMAGES_MAGIC, &[3, 28, 28], &pixels),
        )
        .unwrap();
    }

    #[test]
    fn without_hint_a_fashion_directory_is_fashion_mnist_else_judged_by_mean_pixel() {
        let root = tempfile::tempdir().unwrap();
        let fashion = root.path().join("Fashion-MNIST");
        let dark = root.path().join("digits");
        let bright = root.path().join("clothes");
        for dir in [&fashion, &dark, &bright] {
            std::fs::create_dir(dir).unwrap();
            write_dataset(dir, false);
        }
        fill_train_images(&fashion, 0);
        // MNIST's mean pixel is 33.3, Fashion-MNIST's 72.9.
        fill_train_images(&dark, 33);
        fill_train_images(&bright, 73);
        assert_eq!(
            load_dir(&fashion, None).unwrap().kind,
            DatasetKind::FashionMnist,
            "the directory name decides first"
        );
        assert_eq!(load_dir(&dark, None).unwrap().kind, DatasetKind::Mnist);
        assert_eq!(
            load_dir(&bright, None).unwrap().kind,
            DatasetKind::FashionMnist
        );
        assert_eq!(
            load_dir(&bright, Some(DatasetKind::Mnist)).unwrap().kind,
            DatasetKind::Mnist,
            "the hyperparameter decides above all"
        );
    }

    #[test]
    fn cifar10_asked_of_idx_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let err = load_dir(dir.path(), Some(DatasetKind::Cifar10))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("says cifar10") && err.contains("holds IDX files"),
            "{err}"
        );
    }

    #[test]
    fn truncated_file_names_file_and_expected_size() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let path = dir.path().join("train-images-idx3-ubyte");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("train-images-idx3-ubyte"), "{err}");
        assert!(err.contains("expected 2368"), "{err}");
    }

    #[test]
    fn a_gzip_file_longer_than_its_header_is_refused_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        // Labels for 3 images, then a megabyte more.
        let mut labels = idx(0x0000_0801, &[3], &[1, 2, 3]);
        labels.extend(vec![0u8; 1 << 20]);
        std::fs::write(dir.path().join("train-labels-idx1-ubyte.gz"), gz(&labels)).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("train-labels-idx1-ubyte.gz"), "{err}");
        assert!(
            err.contains(&format!("{} bytes, expected 11", 11 + (1 << 20))),
            "{err}"
        );
    }

    #[test]
    fn wrong_magic_names_file_and_expected_magic() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let path = dir.path().join("t10k-labels-idx1-ubyte");
        std::fs::write(&path, idx(IDX_IMAGES_MAGIC, &[2], &[0, 1])).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("t10k-labels-idx1-ubyte"), "{err}");
        assert!(err.contains("expected 0x00000801"), "{err}");
    }

    #[test]
    fn misnamed_file_is_reported_as_missing_with_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let from = dir.path().join("t10k-images-idx3-ubyte");
        std::fs::rename(&from, dir.path().join("t10k-images.idx3-ubyte")).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("t10k-images-idx3-ubyte[.gz] is missing"),
            "{err}"
        );
        assert!(err.contains("t10k-images.idx3-ubyte"), "{err}");
    }

    #[test]
    fn label_count_mismatch_and_bad_label_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let path = dir.path().join("train-labels-idx1-ubyte");
        std::fs::write(&path, idx(IDX_LABELS_MAGIC, &[2], &[0, 1])).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("holds 3 images but"), "{err}");
        std::fs::write(&path, idx(IDX_LABELS_MAGIC, &[3], &[0, 12, 1])).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("label 12 of example 1 is not a class: labels are from 0 to 9"),
            "{err}"
        );
    }

    #[test]
    fn empty_directory_lists_what_it_expects() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("no dataset found"), "{err}");
        assert!(err.contains("notes.txt"), "{err}");
    }
}
