//! The IDX format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist, "FILE FORMATS"):
//! a big-endian magic number `0x0000_08NN` (`08` = unsigned byte, `NN` = number of
//! dimensions), one big-endian `u32` per dimension, then the data.

use std::path::{Path, PathBuf};

use super::{open_maybe_gz, read_error, DataError, MaybeGz, Split};

/// Magic number of an IDX file of `u8` images with 3 dimensions (count, rows, columns).
pub const IDX_IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of `u8` labels with 1 dimension (count).
pub const IDX_LABELS_MAGIC: u32 = 0x0000_0801;

/// Loads `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` from `dir`
/// (`prefix` is `train` or `t10k`). `found` lists the directory's file names, for the error
/// when one is missing.
///
/// Both headers are read and checked (images `[n, 28, 28]`, labels `[n]`) before any data:
/// a header declaring another shape or count is refused without reading what it declares.
///
/// # Errors
/// [`DataError::MissingFile`], [`DataError::TwoCopies`] (the file both plain and gzipped),
/// [`DataError::BadMagic`], [`DataError::WrongShape`] (images not
/// 28×28), [`DataError::CountMismatch`], [`DataError::WrongSize`] (truncated or longer than
/// the header says, or a gzip stream cut short or corrupt) or [`DataError::BadLabel`], each
/// naming the file.
pub fn load_idx_pair(dir: &Path, prefix: &str, found: &[String]) -> Result<Split, DataError> {
    let images_path = find(dir, &format!("{prefix}-images-idx3-ubyte"), found)?;
    let labels_path = find(dir, &format!("{prefix}-labels-idx1-ubyte"), found)?;
    let images = IdxFile::open(&images_path, IDX_IMAGES_MAGIC, "u8 images, 3 dimensions")?;
    if images.dims[1..] != [28, 28] {
        return Err(DataError::WrongShape {
            path: images_path,
            dataset: "MNIST/Fashion-MNIST",
            expected: [1, 28, 28],
            found: [1, images.dims[1], images.dims[2]],
        });
    }
    let labels = IdxFile::open(&labels_path, IDX_LABELS_MAGIC, "u8 labels, 1 dimension")?;
    if images.dims[0] != labels.dims[0] {
        return Err(DataError::CountMismatch {
            images: images_path,
            labels: labels_path,
            n_images: images.dims[0],
            n_labels: labels.dims[0],
        });
    }
    let images = images.read_data()?;
    let labels = labels.read_data()?;
    if let Some((index, &label)) = labels.iter().enumerate().find(|(_, &l)| l >= 10) {
        return Err(DataError::BadLabel {
            path: labels_path,
            index,
            label: i64::from(label),
            classes: 10,
        });
    }
    Ok(Split {
        images,
        labels,
        shape: [1, 28, 28],
    })
}

/// The path of `stem` or `stem.gz` in `dir` (logged), refused when both exist: which one is
/// current cannot be told (e.g. a `gunzip -k` followed by a new download of the `.gz`).
fn find(dir: &Path, stem: &str, found: &[String]) -> Result<PathBuf, DataError> {
    let (plain, gz) = (dir.join(stem), dir.join(format!("{stem}.gz")));
    let path = match (plain.is_file(), gz.is_file()) {
        (true, true) => return Err(DataError::TwoCopies { plain, gz }),
        (true, false) => Some(plain),
        (false, true) => Some(gz),
        (false, false) => None,
    };
    if let Some(path) = &path {
        tracing::info!(path = %path.display(), "reading");
    }
    path.ok_or_else(|| DataError::MissingFile {
        path: dir.join(format!("{stem}[.gz]")),
        dataset: "IDX (MNIST/Fashion-MNIST)",
        found: super::found_list(found),
    })
}

/// An IDX file whose header has been read and checked against its magic number; its data is
/// still to be read.
struct IdxFile {
    path: PathBuf,
    file: MaybeGz,
    /// The dimensions the header declares, as many as the magic number's rank.
    dims: Vec<usize>,
    /// Header bytes: the 4-byte magic number and 4 per dimension.
    header: usize,
    /// Data bytes the dimensions declare (their product: one byte per `u8` element).
    data_len: usize,
}

impl IdxFile {
    /// Opens an IDX file and reads its header: the magic number, which must be `magic` (`what`
    /// says what it means, for the error), then one big-endian `u32` per dimension.
    ///
    /// # Errors
    /// [`DataError::BadMagic`]; [`DataError::WrongSize`] when the header is cut short, its
    /// dimensions' product overflows `usize`, or a gzip stream ends or is corrupt within it;
    /// [`DataError::Io`].
    fn open(path: &Path, magic: u32, what: &'static str) -> Result<Self, DataError> {
        let mut file = open_maybe_gz(path)?;
        let wrong_size = |expected: String, found: usize| DataError::WrongSize {
            path: path.to_path_buf(),
            expected,
            found: found as u64,
        };
        let rank = (magic & 0xff) as usize;
        let header = 4 + 4 * rank;
        let header_expected = || format!("at least a {header}-byte IDX header");
        let start = read_up_to(path, &mut file, 4, 0, || {
            "at least a 4-byte IDX header".into()
        })?;
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
                named_gz_not_gzip: !file.gzip
                    && path
                        .extension()
                        .is_some_and(|e| e.eq_ignore_ascii_case("gz")),
            });
        }
        let dims_bytes = read_up_to(path, &mut file, 4 * rank, 4, header_expected)?;
        if dims_bytes.len() != 4 * rank {
            return Err(wrong_size(header_expected(), 4 + dims_bytes.len()));
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
        Ok(Self {
            path: path.to_path_buf(),
            file,
            dims,
            header,
            data_len,
        })
    }

    /// Reads the data, which must be exactly as long as the dimensions say. The file is read
    /// (and decompressed) only up to that size plus one byte, to tell a longer file: a gzip
    /// file that decompresses to gigabytes is refused without holding them in memory.
    ///
    /// # Errors
    /// [`DataError::WrongSize`] when the data is shorter or longer than declared, or a gzip
    /// stream is cut short or corrupt; [`DataError::Io`].
    fn read_data(mut self) -> Result<Vec<u8>, DataError> {
        let (header, data_len, dims) = (self.header, self.data_len, &self.dims);
        let expected = || {
            format!(
                "{} ({header}-byte header + {data_len} data bytes for dimensions {dims:?})",
                header + data_len
            )
        };
        let path = self.path.as_path();
        let data = read_up_to(
            path,
            &mut self.file,
            data_len.saturating_add(1),
            header,
            expected,
        )?;
        if data.len() == data_len {
            return Ok(data);
        }
        // Longer than declared: count the rest without keeping it.
        let rest = if data.len() > data_len {
            std::io::copy(&mut self.file.reader, &mut std::io::sink()).map_err(|source| {
                read_error(path, self.file.gzip, source, header + data.len(), expected)
            })? as usize
        } else {
            0
        };
        Err(DataError::WrongSize {
            path: path.to_path_buf(),
            expected: format!("{}; truncated or corrupt file?", expected()),
            found: (header + data.len() + rest) as u64,
        })
    }
}

/// Reads up to `limit` more bytes of `file` (at `path`), after `before` bytes already read; a
/// shorter result means the file ends.
///
/// # Errors
/// As [`read_error`], against `expected`, the size the file must have.
fn read_up_to(
    path: &Path,
    file: &mut MaybeGz,
    limit: usize,
    before: usize,
    expected: impl FnOnce() -> String,
) -> Result<Vec<u8>, DataError> {
    use std::io::Read;
    let mut out = Vec::new();
    // On an error `out` holds what was read before it (`Read::read_to_end`).
    match (&mut file.reader).take(limit as u64).read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(source) => Err(read_error(
            path,
            file.gzip,
            source,
            before + out.len(),
            expected,
        )),
    }
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

    /// IDX files beside CIFAR-10 binary batches (one record per file): the `dataset`
    /// hyperparameter picks either; without it the directory is refused naming both (CIFAR-10
    /// used to win silently, and `dataset=fashion-mnist` was refused).
    #[test]
    fn a_directory_of_two_datasets_is_read_as_the_one_asked_for_else_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        for name in (1..=5)
            .map(|i| format!("data_batch_{i}.bin"))
            .chain(["test_batch.bin".to_string()])
        {
            std::fs::write(dir.path().join(name), vec![3u8; 3073]).unwrap();
        }
        let ds = load_dir(dir.path(), Some(DatasetKind::FashionMnist)).unwrap();
        assert_eq!((ds.kind, ds.train.len()), (DatasetKind::FashionMnist, 3));
        let ds = load_dir(dir.path(), Some(DatasetKind::Mnist)).unwrap();
        assert_eq!(ds.kind, DatasetKind::Mnist);
        let ds = load_dir(dir.path(), Some(DatasetKind::Cifar10)).unwrap();
        assert_eq!((ds.kind, ds.train.len()), (DatasetKind::Cifar10, 5));
        let err = load_dir(dir.path(), None).unwrap_err();
        assert!(matches!(err, DataError::TwoDatasets { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("holds two datasets, CIFAR-10 binary batches and IDX files")
                && err.contains("set the dataset hyperparameter"),
            "{err}"
        );
    }

    /// `train-labels-idx1-ubyte` beside `train-labels-idx1-ubyte.gz` (as `gunzip -k` leaves
    /// them, or a fresh download beside an old copy): refused naming both, instead of the
    /// uncompressed one read silently.
    #[test]
    fn an_idx_file_both_plain_and_gzipped_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        std::fs::write(
            dir.path().join("train-labels-idx1-ubyte"),
            idx(IDX_LABELS_MAGIC, &[3], &[9, 9, 9]),
        )
        .unwrap();
        let err = load_dir(dir.path(), Some(DatasetKind::FashionMnist)).unwrap_err();
        assert!(matches!(err, DataError::TwoCopies { .. }), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains("train-labels-idx1-ubyte and ")
                && err.contains("train-labels-idx1-ubyte.gz are both present")
                && err.contains("remove one of them"),
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
    fn a_gzip_file_cut_short_is_a_wrong_size_with_the_expected_size() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        let path = dir.path().join("train-images-idx3-ubyte.gz");
        let whole = std::fs::read(&path).unwrap();
        // Within the deflate data, then within the 8-byte CRC and length trailer.
        for cut in [whole.len() / 2, whole.len() - 4] {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let err = load_dir(dir.path(), None).unwrap_err();
            assert!(matches!(err, DataError::WrongSize { .. }), "{err:?}");
            let err = err.to_string();
            assert!(err.contains("train-images-idx3-ubyte.gz: "), "{err}");
            assert!(err.contains("expected 2368 (16-byte header"), "{err}");
            assert!(err.contains("the gzip stream is cut short"), "{err}");
        }
    }

    #[test]
    fn every_member_of_a_multi_member_gzip_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        let pixels: Vec<u8> = (0..3 * 784).map(|i| (i % 251) as u8).collect();
        let whole = idx(IDX_IMAGES_MAGIC, &[3, 28, 28], &pixels);
        // `cat a.gz b.gz`: the header and part of the data, then the rest.
        let mut members = gz(&whole[..1000]);
        members.extend(gz(&whole[1000..]));
        std::fs::write(dir.path().join("train-images-idx3-ubyte.gz"), members).unwrap();
        let ds = load_dir(dir.path(), None).unwrap();
        assert_eq!(ds.train.images, pixels);
    }

    /// Zero bytes after the last member (padding to a block size, which `gzip -d` and
    /// Python's `gzip` skip) are not data; other bytes there are refused, naming the file.
    #[test]
    fn zero_padding_after_a_gzip_file_is_skipped_and_other_bytes_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), true);
        let path = dir.path().join("train-images-idx3-ubyte.gz");
        let whole = std::fs::read(&path).unwrap();
        let mut padded = whole.clone();
        padded.extend([0u8; 512]);
        std::fs::write(&path, &padded).unwrap();
        let ds = load_dir(dir.path(), None).unwrap();
        assert_eq!(ds.train.len(), 3);
        let mut junk = whole;
        junk.extend(b"JUNK");
        std::fs::write(&path, &junk).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(
            err.contains("train-images-idx3-ubyte.gz")
                && err.contains("bytes after the last gzip member"),
            "{err}"
        );
    }

    /// The header's shape and count are checked before its data is read: a header declaring
    /// gigabytes over a short body is refused for its shape, not read and found short.
    #[test]
    fn a_header_of_another_shape_or_count_is_refused_before_its_data_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        let path = dir.path().join("train-images-idx3-ubyte");
        std::fs::write(&path, idx(IDX_IMAGES_MAGIC, &[1, 50_000, 50_000], &[0; 10])).unwrap();
        let err = load_dir(dir.path(), None).unwrap_err();
        assert!(matches!(err, DataError::WrongShape { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("images are [1, 50000, 50000] (C×H×W), MNIST/Fashion-MNIST images"),
            "{err}"
        );
        std::fs::write(
            &path,
            idx(IDX_IMAGES_MAGIC, &[4_000_000_000, 28, 28], &[0; 10]),
        )
        .unwrap();
        let err = load_dir(dir.path(), None).unwrap_err();
        assert!(matches!(err, DataError::CountMismatch { .. }), "{err:?}");
        assert!(
            err.to_string().contains("holds 4000000000 images but"),
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
    fn a_gz_name_on_a_file_that_is_not_gzip_is_said_with_the_wrong_magic() {
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), false);
        std::fs::remove_file(dir.path().join("t10k-labels-idx1-ubyte")).unwrap();
        let path = dir.path().join("t10k-labels-idx1-ubyte.gz");
        std::fs::write(&path, b"<!DOCTYPE html><html>Not Found</html>").unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("t10k-labels-idx1-ubyte.gz"), "{err}");
        assert!(err.contains("expected 0x00000801"), "{err}");
        assert!(
            err.contains("the name ends in .gz but the file is not gzip"),
            "{err}"
        );
        // A raw IDX file under its own name gets no such note.
        std::fs::remove_file(&path).unwrap();
        let raw = dir.path().join("t10k-labels-idx1-ubyte");
        std::fs::write(&raw, b"<!DOCTYPE html><html>Not Found</html>").unwrap();
        let err = load_dir(dir.path(), None).unwrap_err().to_string();
        assert!(err.contains("wrong magic number"), "{err}");
        assert!(!err.contains("not gzip"), "{err}");
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
