//! Image classification datasets: detection from a data directory, the on-disk readers,
//! per-dataset normalisation, training-only augmentation, and the distributed sampler.
//!
//! Images are held as `u8` pixels in channel-major (`C×H×W`) order, exactly as the CIFAR-10
//! binary and IDX files store them, and converted to normalised `f32` only per batch.

mod augment;
mod batch;
mod cifar;
mod cifar_python;
mod idx;
mod sampler;

use std::io::Read as _;
use std::path::{Path, PathBuf};

pub use augment::augment_cifar;
pub use batch::{make_batch, Batch};
pub use cifar::{load_cifar10, CIFAR10_RECORD_BYTES};
pub use cifar_python::{load_cifar10_python, PYTHON_TEST_FILE, PYTHON_TRAIN_FILES};
pub use idx::{load_idx_pair, IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC};
pub use kfaws_trainer_contract::DatasetKind;
pub use sampler::DistributedSampler;

/// Why a dataset could not be read. Every variant names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The directory holds no CIFAR-10 (binary or python) nor IDX dataset.
    #[error(
        "no dataset found in {dir}: expected CIFAR-10 binary files (data_batch_1.bin … \
         data_batch_5.bin, test_batch.bin), CIFAR-10 python batches (data_batch_1 … \
         data_batch_5, test_batch) or IDX files (train-images-idx3-ubyte, \
         train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each \
         optionally .gz); found: [{found}]"
    )]
    NotFound {
        /// The data directory searched.
        dir: PathBuf,
        /// Its entries' names, comma-separated: the first 20, then how many more.
        found: String,
    },
    /// Part of a dataset is there but one expected file is missing (often misnamed).
    #[error(
        "{path} is missing: the {dataset} dataset in this directory needs it (found: [{found}])"
    )]
    MissingFile {
        /// The file expected; for IDX files a pattern, `<dir>/<name>[.gz]`, since either is read.
        path: PathBuf,
        /// The format recognised: `CIFAR-10 binary`, `CIFAR-10 python` or
        /// `IDX (MNIST/Fashion-MNIST)`.
        dataset: &'static str,
        /// The data directory's entries' names, comma-separated: the first 20, then how many
        /// more.
        found: String,
    },
    /// A CIFAR-10 python batch is not a pickled dict of `labels` and a `uint8` `data` array.
    #[error("{path}: not a CIFAR-10 python batch: {reason}")]
    Pickle {
        /// The batch file.
        path: PathBuf,
        /// What is wrong: not a readable pickle, not a dict, or a `labels` or `data` entry
        /// missing or not as expected (`data`: a C-order `uint8` numpy array of shape
        /// `[n, 3072]`, n the number of labels).
        reason: String,
    },
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file read, or the data directory when listing it failed.
        path: PathBuf,
        /// The operating system's (or gzip decoder's) error.
        #[source]
        source: std::io::Error,
    },
    /// An IDX file starts with the wrong magic number.
    #[error(
        "{path}: wrong magic number 0x{found:08x}, expected 0x{expected:08x} ({what}){}",
        if *named_gz_not_gzip {
            "; the name ends in .gz but the file is not gzip (it does not start with 1f 8b): \
             a download that saved an error page?"
        } else {
            ""
        }
    )]
    BadMagic {
        /// The IDX file.
        path: PathBuf,
        /// The magic number this file must have: [`IDX_IMAGES_MAGIC`] or [`IDX_LABELS_MAGIC`]
        /// (IDX format, yann.lecun.com/exdb/mnist).
        expected: u32,
        /// The file's first 4 bytes (after gzip decompression), read big-endian.
        found: u32,
        /// What the expected magic number means, e.g. `u8 images, 3 dimensions`.
        what: &'static str,
        /// Whether the file's name ends in `.gz` although it does not start with gzip's magic
        /// bytes `1f 8b` (RFC 1952 §2.3.1), so it was read as raw IDX.
        named_gz_not_gzip: bool,
    },
    /// A file is shorter (or longer) than its header or record size says, or its gzip stream
    /// is cut short or corrupt (then `expected` says so, and `found` counts the bytes
    /// decompressed before that).
    #[error("{path}: {found} bytes, expected {expected}")]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// The size it should have, in bytes, as a number or a rule (e.g. a multiple of
        /// [`CIFAR10_RECORD_BYTES`]) with how it follows from the header or format.
        expected: String,
        /// Bytes the file holds, after gzip decompression (for IDX dimensions too large to hold:
        /// only the header's bytes, the rest is not read).
        found: u64,
    },
    /// Image and label files disagree on the number of examples.
    #[error("{images} holds {n_images} images but {labels} holds {n_labels} labels")]
    CountMismatch {
        /// The IDX images file.
        images: PathBuf,
        /// The IDX labels file.
        labels: PathBuf,
        /// Images the images file's header declares (its first dimension). Both headers are
        /// compared before either file's data is read.
        n_images: usize,
        /// Labels the labels file's header declares (its only dimension).
        n_labels: usize,
    },
    /// A label that is not a class index (0 to 9).
    #[error(
        "{path}: label {label} of example {index} is not a class: labels are from 0 to {}",
        classes - 1
    )]
    BadLabel {
        /// The file holding the label (CIFAR-10 batch or IDX labels file).
        path: PathBuf,
        /// The example's position in that file, counted from 0.
        index: usize,
        /// The label found: a byte in the binary formats, any int (negative ones included) in a
        /// CIFAR-10 python batch.
        label: i64,
        /// Number of classes; labels must be below it (10 for every dataset supported).
        classes: usize,
    },
    /// Images of a size the dataset kind does not have.
    #[error("{path}: images are {found:?} (C×H×W), {dataset} images are {expected:?}")]
    WrongShape {
        /// The images file.
        path: PathBuf,
        /// The dataset the images should belong to, e.g. `MNIST/Fashion-MNIST`.
        dataset: &'static str,
        /// That dataset's image shape, `[C, H, W]` (`[1, 28, 28]` for MNIST and Fashion-MNIST).
        expected: [usize; 3],
        /// The shape the file's header declares, `[C, H, W]`; C is 1 for IDX files, which
        /// have no channel dimension.
        found: [usize; 3],
    },
    /// The `dataset` hyperparameter names a dataset other than the one the files hold.
    #[error(
        "the dataset hyperparameter says {asked}, but {dir} holds {found}: point the data at \
         {asked}, or drop dataset= (only MNIST and Fashion-MNIST IDX files need it to tell \
         them apart)"
    )]
    NotTheDataset {
        /// The data directory.
        dir: PathBuf,
        /// The dataset the hyperparameter names, as [`DatasetKind::name`] spells it.
        asked: &'static str,
        /// What the directory holds, e.g. `CIFAR-10 binary batches` or
        /// `IDX files (MNIST or Fashion-MNIST)`.
        found: &'static str,
    },
    /// The directory holds two datasets and the `dataset` hyperparameter does not choose.
    #[error(
        "{dir} holds two datasets, {first} and {second}: set the dataset hyperparameter \
         (dataset=cifar10, dataset=fashion-mnist or dataset=mnist) to choose one, or give a \
         directory holding only one"
    )]
    TwoDatasets {
        /// The data directory.
        dir: PathBuf,
        /// The first found, e.g. `CIFAR-10 binary batches`.
        first: &'static str,
        /// The second found, e.g. `IDX files (MNIST or Fashion-MNIST)`.
        second: &'static str,
    },
    /// An IDX file is there both uncompressed and gzipped: which one is current (the other
    /// may be a stale or partial copy) cannot be told, so neither is read.
    #[error("{plain} and {gz} are both present, and may hold different data: remove one of them")]
    TwoCopies {
        /// The uncompressed file.
        plain: PathBuf,
        /// The gzipped file.
        gz: PathBuf,
    },
}

/// One split: `labels.len()` images of `shape`, pixels concatenated channel-major.
#[derive(Debug, Clone)]
pub struct Split {
    /// `len × C × H × W` pixels.
    pub images: Vec<u8>,
    /// One label in `0..10` per image.
    pub labels: Vec<u8>,
    /// `[C, H, W]`.
    pub shape: [usize; 3],
}

impl Split {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the split holds no example.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Pixels of example `i`, `C×H×W` bytes.
    pub fn image(&self, i: usize) -> &[u8] {
        let size = self.shape.iter().product::<usize>();
        &self.images[i * size..(i + 1) * size]
    }

    /// Keeps only the first `n` examples (for short runs and tests).
    pub fn truncate(&mut self, n: usize) {
        let size = self.shape.iter().product::<usize>();
        self.labels.truncate(n);
        self.images.truncate(n * size);
    }
}

/// A dataset with its training and test splits.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Which dataset this is.
    pub kind: DatasetKind,
    /// Training split.
    pub train: Split,
    /// Test split, never augmented.
    pub test: Split,
}

/// Loads the dataset found in `dir`.
///
/// CIFAR-10 binary files are looked for in `dir` and `dir/cifar-10-batches-bin`, CIFAR-10
/// python batches in `dir` and `dir/cifar-10-batches-py` (the layouts of the official
/// archives); IDX files in `dir`. IDX files do not say whether they hold MNIST or
/// Fashion-MNIST, so `hint` (the `dataset` hyperparameter) decides, else a directory path
/// containing "fashion", else the training images' mean pixel value.
///
/// A directory holding both CIFAR-10 and IDX files is read as the dataset `hint` names;
/// without a hint it is refused.
///
/// # Errors
/// [`DataError`] naming the file that is missing, truncated or has the wrong magic number;
/// [`DataError::NotTheDataset`] when `hint` names a dataset the directory does not hold
/// (CIFAR-10 asked of IDX files, or MNIST / Fashion-MNIST of CIFAR-10 batches);
/// [`DataError::TwoDatasets`] when it holds both and `hint` is `None`;
/// [`DataError::TwoCopies`] when an IDX file is there both plain and gzipped.
pub fn load_dir(dir: &Path, hint: Option<DatasetKind>) -> Result<Dataset, DataError> {
    let found = list_dir(dir)?;
    const CIFAR_BIN: &str = "CIFAR-10 binary batches";
    const CIFAR_PY: &str = "CIFAR-10 python batches";
    const IDX: &str = "IDX files (MNIST or Fashion-MNIST)";
    let cifar_bin = [dir.to_path_buf(), dir.join("cifar-10-batches-bin")]
        .into_iter()
        .find(|d| d.join("data_batch_1.bin").exists() || d.join("test_batch.bin").exists());
    let cifar_py = [dir.to_path_buf(), dir.join("cifar-10-batches-py")]
        .into_iter()
        .find(|d| d.join(PYTHON_TRAIN_FILES[0]).is_file() || d.join(PYTHON_TEST_FILE).is_file());
    let idx = found
        .iter()
        .any(|name| name.contains("idx1-ubyte") || name.contains("idx3-ubyte"));
    // CIFAR-10's binary batches win over its python ones: the same dataset either way.
    let cifar = cifar_bin
        .map(|d| (d, CIFAR_BIN))
        .or(cifar_py.map(|d| (d, CIFAR_PY)));
    let not_the_dataset = |asked: DatasetKind, found: &'static str| DataError::NotTheDataset {
        dir: dir.to_path_buf(),
        asked: asked.name(),
        found,
    };
    // The `dataset` hyperparameter chooses among the datasets present; without it, two are
    // refused rather than one picked silently.
    let use_cifar = match (hint, &cifar, idx) {
        (Some(DatasetKind::Cifar10), Some(_), _) => true,
        (Some(asked @ DatasetKind::Cifar10), None, true) => {
            return Err(not_the_dataset(asked, IDX))
        }
        (Some(_), _, true) => false,
        (Some(asked), Some((_, what)), false) => return Err(not_the_dataset(asked, what)),
        (None, Some((_, what)), true) => {
            return Err(DataError::TwoDatasets {
                dir: dir.to_path_buf(),
                first: what,
                second: IDX,
            })
        }
        (None, Some(_), false) => true,
        (_, None, _) => false,
    };
    if let (true, Some((cifar_dir, what))) = (use_cifar, &cifar) {
        return if *what == CIFAR_BIN {
            load_cifar10(cifar_dir)
        } else {
            load_cifar10_python(cifar_dir)
        };
    }
    if idx {
        let train = load_idx_pair(dir, "train", &found)?;
        let test = load_idx_pair(dir, "t10k", &found)?;
        let kind = match hint {
            Some(kind) => {
                let judged = idx_kind_by_content(&train);
                if judged != kind {
                    tracing::warn!(
                        dataset = kind.name(),
                        looks_like = judged.name(),
                        "the dataset hyperparameter decides, but the IDX files' mean pixel value \
                         is that of the other dataset: check dataset= (the class names and the \
                         normalisation follow it)"
                    );
                }
                kind
            }
            _ if dir
                .to_string_lossy()
                .to_ascii_lowercase()
                .contains("fashion") =>
            {
                DatasetKind::FashionMnist
            }
            _ => {
                let kind = idx_kind_by_content(&train);
                tracing::warn!(
                    dataset = kind.name(),
                    "the IDX files do not say which dataset they hold; judged by their mean pixel \
                     value (set the hyperparameter dataset=mnist or dataset=fashion-mnist to say)"
                );
                kind
            }
        };
        return Ok(Dataset { kind, train, test });
    }
    Err(DataError::NotFound {
        dir: dir.to_path_buf(),
        found: found_list(&found),
    })
}

/// The names of a directory's files for an error message: all of them up to
/// [`FOUND_LIST_MAX`], then the first ones and how many more (a dataset
/// pointed at `/etc` must not print a screenful).
pub(crate) fn found_list(found: &[String]) -> String {
    if found.len() <= FOUND_LIST_MAX {
        return found.join(", ");
    }
    format!(
        "{}, … {} more",
        found[..FOUND_LIST_MAX].join(", "),
        found.len() - FOUND_LIST_MAX
    )
}

/// At most this many file names are listed in an error.
const FOUND_LIST_MAX: usize = 20;

/// MNIST or Fashion-MNIST, told apart by the mean pixel value of (up to)
/// the first 10,000 training images: 33.3 for MNIST and 72.9 for
/// Fashion-MNIST (the means behind their usual normalisation constants,
/// 0.1307 and 0.2860 of 255); the threshold is halfway.
fn idx_kind_by_content(train: &Split) -> DatasetKind {
    let size: usize = train.shape.iter().product();
    let n = train.len().min(10_000) * size;
    if n == 0 {
        return DatasetKind::Mnist;
    }
    let mean = train.images[..n].iter().map(|&p| f64::from(p)).sum::<f64>() / n as f64;
    if mean > (33.3 + 72.9) / 2.0 {
        DatasetKind::FashionMnist
    } else {
        DatasetKind::Mnist
    }
}

/// Sorted file names in `dir`.
fn list_dir(dir: &Path) -> Result<Vec<String>, DataError> {
    let io = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        names.push(
            entry
                .map_err(io)?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    Ok(names)
}

/// A data file opened for reading by [`open_maybe_gz`].
struct MaybeGz {
    /// The file's bytes, decompressed as they are read when it is gzip.
    reader: Box<dyn std::io::Read>,
    /// Whether the file is gzip (starts with the magic bytes `1f 8b`, RFC 1952 §2.3.1).
    gzip: bool,
}

/// Every member of a gzip file, decompressed in order (RFC 1952 §2.2: `cat a.gz b.gz`,
/// bgzip), as `gzip -d` and Python's `gzip` module read one: zero bytes between or after
/// members (padding to a block size) are skipped; any other bytes there are an
/// `InvalidData` error.
struct GzMembers<R: std::io::BufRead> {
    /// The member being read; `None` once the file has ended.
    decoder: Option<flate2::bufread::GzDecoder<R>>,
}

impl<R: std::io::BufRead> std::io::Read for GzMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(decoder) = self.decoder.as_mut() {
            let n = decoder.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // The member ended: what follows is another member, padding, or the end.
            let mut rest = self.decoder.take().expect("read above").into_inner();
            loop {
                let bytes = rest.fill_buf()?;
                match bytes.first() {
                    None => return Ok(0),
                    Some(0) => {
                        let zeros = bytes.iter().take_while(|b| **b == 0).count();
                        rest.consume(zeros);
                    }
                    Some(0x1f) => break,
                    Some(_) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "bytes after the last gzip member that are neither zero padding nor \
                             another member",
                        ))
                    }
                }
            }
            self.decoder = Some(flate2::bufread::GzDecoder::new(rest));
        }
        Ok(0)
    }
}

/// Opens a file for reading, decompressing gzip (by its magic bytes, not its name) as it is
/// read, so that a reader can stop at the size a header declares. Every member of a
/// multi-member gzip file is decompressed, in order, and zero padding after them skipped
/// ([`GzMembers`]).
///
/// # Errors
/// [`DataError::Io`] when the file cannot be opened or its first bytes read.
fn open_maybe_gz(path: &Path) -> Result<MaybeGz, DataError> {
    use std::io::BufRead;
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
    let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn std::io::Read> = if gzip {
        Box::new(GzMembers {
            decoder: Some(flate2::bufread::GzDecoder::new(file)),
        })
    } else {
        Box::new(file)
    };
    Ok(MaybeGz { reader, gzip })
}

/// The error for a read of `path` (gzip when `gzip`) that failed after `found` bytes
/// (decompressed) when the format needs `expected` (a byte count or rule, as
/// [`DataError::WrongSize`] states it).
///
/// flate2 reports a gzip file cut short (before the end of its header, its last deflate block
/// or its 8-byte CRC and length trailer) as `UnexpectedEof`, and a corrupt one (a bad
/// header, deflate data or checksum) as `InvalidInput`: either is [`DataError::WrongSize`]
/// saying which. Any other error, and any error reading a file that is not gzip, is
/// [`DataError::Io`].
fn read_error(
    path: &Path,
    gzip: bool,
    source: std::io::Error,
    found: usize,
    expected: impl FnOnce() -> String,
) -> DataError {
    let (what, hint) = match source.kind() {
        std::io::ErrorKind::UnexpectedEof if gzip => ("cut short", ": the file is truncated"),
        std::io::ErrorKind::InvalidInput if gzip => ("corrupt", ""),
        _ => {
            return DataError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    };
    DataError::WrongSize {
        path: path.to_path_buf(),
        expected: format!(
            "{}; the gzip stream is {what} after {found} decompressed bytes ({source}){hint}",
            expected()
        ),
        found: found as u64,
    }
}

/// Reads a whole file, decompressing gzip (by its magic bytes, not its name, and every member
/// of a multi-member file).
///
/// # Errors
/// [`DataError::WrongSize`] against `expected` (the decompressed size the format needs, as
/// [`DataError::WrongSize`] states it) when the gzip stream is cut short or corrupt;
/// [`DataError::Io`] when the file cannot be read.
fn read_maybe_gz_sized(
    path: &Path,
    expected: impl FnOnce() -> String,
) -> Result<Vec<u8>, DataError> {
    let mut file = open_maybe_gz(path)?;
    let mut out = Vec::new();
    // On an error `out` holds what was decompressed before it (`Read::read_to_end`).
    match file.reader.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(source) => Err(read_error(path, file.gzip, source, out.len(), expected)),
    }
}

/// [`read_maybe_gz_sized`] for a format whose size only its complete gzip stream tells.
///
/// # Errors
/// As [`read_maybe_gz_sized`].
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, DataError> {
    read_maybe_gz_sized(path, || "the whole gzip stream".into())
}
